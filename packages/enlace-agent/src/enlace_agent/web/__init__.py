"""The family web page (`enlace-assistant serve`): the assistant in the browser, with a history per
person. Needs the `web` extra (`pip install "enlace-agent[web]"`: Starlette and uvicorn). Its
database is the household's (`enlace_agent.household`).

    from enlace_agent.web import build_app
    app = build_app(assistant, env)   # a Starlette app; the CLI serves it with uvicorn
"""

from enlace_agent.household import SCHEMA_VERSION, Store, StoreError, WebSetupError, resolve_tokens
from enlace_agent.web.setup import build_app

__all__ = [
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "WebSetupError",
    "build_app",
    "resolve_tokens",
]
