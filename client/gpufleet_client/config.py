"""Where the server is and the organisation's API key: the environment first, then the config file.

GPUFLEET_URL    the control plane (default http://127.0.0.1:8000)
GPUFLEET_KEY    an API key of the organisation, gf_... (GPUFLEET_TOKEN, its older name, is still read)
$XDG_CONFIG_HOME/gpufleet/config.toml (~/.config/gpufleet/config.toml): `url` and `key` (or `token`)

Where both names are given in one place, the key wins: GPUFLEET_KEY over GPUFLEET_TOKEN, `key`
over `token`; and the environment wins over the file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


class ConfigError(Exception):
    """The configuration is unreadable, or lacks what the command needs."""


@dataclass(frozen=True)
class Config:
    url: str
    key: str | None
    path: Path  # the config file, read or not

    def require_key(self) -> str:
        if not self.key:
            raise ConfigError(
                f'no API key: set GPUFLEET_KEY, or put key = "gf_..." in {self.path} '
                "(an admin of your organisation makes one with `gpufleet keys create`; "
                "an operator, with `manage.py create_tenant NAME`)"
            )
        return self.key


def config_path(environ: dict[str, str] | os._Environ = os.environ) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpufleet" / "config.toml"


def load(environ: dict[str, str] | os._Environ = os.environ) -> Config:
    path = config_path(environ)
    settings = _read(path)
    url = environ.get("GPUFLEET_URL") or settings.get("url") or DEFAULT_URL
    key = (
        environ.get("GPUFLEET_KEY")
        or environ.get("GPUFLEET_TOKEN")
        or settings.get("key")
        or settings.get("token")
        or None
    )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the server URL {url!r} is not http:// or https://")
    return Config(url=url.rstrip("/"), key=(key.strip() or None) if key else None, path=path)


def _read(path: Path) -> dict[str, str]:
    try:
        with path.open("rb") as file:
            settings = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not TOML: {error}") from None
    for name in ("url", "key", "token"):
        if name in settings and not isinstance(settings[name], str):
            raise ConfigError(f"{path}: {name} must be a string")
    return settings
