"""The package's licence: the LICENSE file holds the Apache License 2.0 that pyproject.toml declares."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_declares_apache_and_ships_the_license_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_license_file_is_the_full_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    head = " ".join(text.split()[:6])
    assert head == "Apache License Version 2.0, January 2004"
    for clause in ("1. Definitions.", "4. Redistribution.", "9. Accepting Warranty or Additional Liability.",
                   "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License to your work."):
        assert clause in text, clause
