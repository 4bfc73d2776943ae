"""The plugin's options, one definition each: flag, ini key and variable."""

from __future__ import annotations

from pytest_enginedead.logic.inputs.optiontable import OPTIONS


def test_every_option_has_flag_ini_and_env() -> None:
    """Each option: --enginedead-x flag, enginedead_x ini key, ENGINEDEAD_X variable."""
    names = {o.name for o in OPTIONS}
    assert {"enginedead_batch_sizes", "enginedead_model", "enginedead_policy", "enginedead_report"} <= names
    for opt in OPTIONS:
        assert opt.flag == "--" + opt.name.replace("_", "-")
        assert opt.env == opt.name.upper()
