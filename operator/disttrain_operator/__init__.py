__version__ = "0.1.0"  # pyproject.toml's and the chart's appVersion (tests/unit/test_cli.py keeps them equal)
