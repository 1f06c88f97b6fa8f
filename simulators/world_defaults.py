"""Where training worlds are cached (kept apart from ``worlds`` so the CLI can name it cheaply)."""

from pathlib import Path

CACHE_ENV = "WHATIF_WORLDS"
DEFAULT_CACHE = Path("~/.cache/whatif-bench/worlds")
