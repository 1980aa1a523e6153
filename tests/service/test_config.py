"""Every server setting is documented in the README's settings table with its variable and default."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import ENV_PREFIX, Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_setting_is_in_the_readme_table_with_its_default(name):
    field = Settings.model_fields[name]
    rows = [line for line in README.splitlines() if line.startswith(f"| `{ENV_PREFIX}{name.upper()}` (`--")]
    assert len(rows) == 1, f"{ENV_PREFIX}{name.upper()} is not in the README's settings table"
    default = field.default
    shown = {None: "none", "": "empty"}.get(default) if default is None or default == "" else (
        str(default).lower() if isinstance(default, bool) else str(default))
    assert rows[0].split("|")[2].strip() == shown, rows[0]
