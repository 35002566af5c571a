"""`python -m enlace_agent.search "consulta"`: the same as `enlace-search`."""

from enlace_agent.cli.search import main

raise SystemExit(main())
