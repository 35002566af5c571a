"""`python -m enlace_agent.tools.search "consulta"`: the same as `enlace-search`."""

from enlace_agent.tools.search.cli import main

raise SystemExit(main())
