"""Where the server is and the tenant's API token: the environment first, then the config file.

GPUFLEET_URL    the control plane (default http://127.0.0.1:8000)
GPUFLEET_TOKEN  the tenant's API token
$XDG_CONFIG_HOME/gpufleet/config.toml (~/.config/gpufleet/config.toml): `url` and `token`
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
    token: str | None
    path: Path  # the config file, read or not

    def require_token(self) -> str:
        if not self.token:
            raise ConfigError(
                f'no API token: set GPUFLEET_TOKEN, or put token = "..." in {self.path} '
                "(an operator creates it with `manage.py create_tenant NAME`)"
            )
        return self.token


def config_path(environ: dict[str, str] | os._Environ = os.environ) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpufleet" / "config.toml"


def load(environ: dict[str, str] | os._Environ = os.environ) -> Config:
    path = config_path(environ)
    settings = _read(path)
    url = environ.get("GPUFLEET_URL") or settings.get("url") or DEFAULT_URL
    token = environ.get("GPUFLEET_TOKEN") or settings.get("token") or None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the server URL {url!r} is not http:// or https://")
    return Config(url=url.rstrip("/"), token=token.strip() if token else None, path=path)


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
    for key in ("url", "token"):
        if key in settings and not isinstance(settings[key], str):
            raise ConfigError(f"{path}: {key} must be a string")
    return settings
