"""The compose file's query service and watcher, checked statically (no Docker
engine runs here): they exist, share the image and volume, publish only on
loopback, and their commands are ones the CLI accepts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _services() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]


def test_serve_and_watch_services_share_the_volume_and_publish_on_loopback_only() -> None:
    services = _services()
    for name in ("serve", "watch"):
        assert services[name]["profiles"] == ["service"]
        assert "acms-data:/data" in services[name]["volumes"]
    assert services["serve"]["command"][:3] == ["serve", "--http", "0.0.0.0:8765"]
    assert all(p.startswith("127.0.0.1:") for p in services["serve"]["ports"])
    assert services["watch"]["command"] == ["watch"]


def test_every_search_example_in_the_docker_readme_has_a_scope() -> None:
    text = (DOCKER / "README.md").read_text()
    searches = re.findall(r"acms (?:--json )?search (?:text|vector) .*", text)
    assert searches
    assert all("--project" in line or "--resource" in line for line in searches)
