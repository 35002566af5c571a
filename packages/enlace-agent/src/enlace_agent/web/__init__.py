"""The family web page (`enlace-assistant serve`): the assistant in the browser, with a history per
person. Needs the `web` extra (`pip install "enlace-agent[web]"`: Starlette and uvicorn).

    from enlace_agent.web import build_app
    app = build_app(assistant, env)   # a Starlette app; the CLI serves it with uvicorn
"""

from enlace_agent.web.setup import WebSetupError, build_app, resolve_tokens
from enlace_agent.web.store import SCHEMA_VERSION, Store, StoreError, default_path

__all__ = [
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "WebSetupError",
    "build_app",
    "default_path",
    "resolve_tokens",
]
