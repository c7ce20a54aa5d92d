"""One typed config tree (YAML + dotted overrides); see docs/config.md."""

from easyvideor1.config.loader import (
    apply_override,
    config_reference,
    dump_config,
    load_config,
    validate_config,
)
from easyvideor1.config.schema import RunConfig

__all__ = ["RunConfig", "apply_override", "config_reference", "dump_config", "load_config", "validate_config"]
