"""Which schema validates which config file: chosen by the folder under `configs/` it lives in.

`configs/runs/` holds run files (composed from layers, validated as a whole `RunConfig`); every
other folder maps to one schema here. A package that adds a kind of config file adds one line to
`SCHEMAS` (its schema module lives in `enlace_config.schema`, so validating never imports the
package that uses it). Modules are imported only when a file of their kind is checked, so
`check configs/runs/*.yaml` pays for no other schema.
"""

import importlib

from pydantic import BaseModel

RUNS_FOLDER = "runs"

# folder under configs/ -> "module:Class". The four layer slots of a run file come first.
SCHEMAS: dict[str, str] = {
    "hardware": "enlace_config.schema.hardware:HardwareConfig",
    "model": "enlace_config.schema.model:ModelConfig",
    "train": "enlace_config.schema.train:TrainConfig",
    "data": "enlace_config.schema.data:DataConfig",
    "corpus": "enlace_config.schema.corpus:CorpusConfig",
    "chat": "enlace_config.schema.chat:ChatRecipeConfig",
    "agent": "enlace_config.schema.agent:SearchConfig",
    # "folder/stem": one file of a folder with its own schema (wins over the folder's entry)
    "agent/assistant": "enlace_config.schema.agent:AssistantConfig",
}


def known_folders() -> list[str]:
    """Every folder with a schema, `runs` included."""
    return [RUNS_FOLDER, *SCHEMAS]


def schema_for(folder: str, stem: str | None = None) -> type[BaseModel] | None:
    """The schema for `configs/<folder>/<stem>.yaml` (RunConfig for runs, but run files are
    composed first: use load_run_config), or None when that folder has none."""
    if folder == RUNS_FOLDER:
        from enlace_config.schema.run import RunConfig

        return RunConfig
    target = SCHEMAS.get(f"{folder}/{stem}") or SCHEMAS.get(folder)
    if target is None:
        return None
    module_name, _, class_name = target.partition(":")
    model: object = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"SCHEMAS[{folder!r}] = {target!r} is not a pydantic model")
    return model
