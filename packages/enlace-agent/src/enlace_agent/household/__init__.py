"""The household core, with no web framework in it: where everything of a household lives
(`HouseholdPaths`), its database (`Store`: schema, migrations, private files), and its people.
Memory, snapshots, `doctor`, the model versions, the services, the tools and the page stand on it.
"""

from enlace_agent.household.database import Store, StoreBusy, StoreError, store_for
from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.household.people import WebSetupError, resolve_tokens
from enlace_agent.household.schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "HouseholdPaths",
    "Store",
    "StoreBusy",
    "StoreError",
    "WebSetupError",
    "resolve_tokens",
    "store_for",
]
