"""Every server setting is in the generated docs/CONFIGURATION.md with its flag, variable and default."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from common.cli import parse_config
from common.errors import AppError
from service.config import ENV_PREFIX, Settings

REFERENCE = (Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
SERVER = REFERENCE.split("## `python -m service`", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_setting_is_in_the_server_table_with_its_variable_and_default(name):
    field = Settings.model_fields[name]
    rows = [line for line in SERVER.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name} is not in the server's table of docs/CONFIGURATION.md"
    cells = [c.strip() for c in rows[0].split(" | ")]
    assert cells[2] == f"`{ENV_PREFIX}{name.upper()}`", rows[0]
    default = field.default
    if default is None:
        assert cells[4] == "*none*", rows[0]
    elif isinstance(default, bool):
        assert cells[4] == f"`{str(default).lower()}`", rows[0]
    elif default != "" and not isinstance(default, (list, tuple)):
        assert cells[4] == f"`{default}`", rows[0]


@pytest.mark.parametrize("given, want", [("debug", "debug"), ("WARNING", "warning"), (" Info ", "info")])
def test_a_log_level_is_one_of_the_choices_in_any_case(tiny_index, given, want):
    assert Settings(index=tiny_index, log_level=given).log_level == want


def test_a_bad_log_level_is_refused_naming_the_flag_and_the_choices(tiny_index):
    with pytest.raises(ValidationError):
        Settings(index=tiny_index, log_level="bogus")
    with pytest.raises(AppError) as raised:
        parse_config(Settings, {"index": tiny_index, "log_level": "bogus"}, ENV_PREFIX)
    message = raised.value.message
    assert message.startswith("--log-level (FILL_LOG_LEVEL): ") and "'debug', 'info', 'warning'" in message, message
