"""The fixtures live in tests/fixtures/, one module each; this file registers them."""

pytest_plugins = ["tests.fixtures.cli", "tests.fixtures.ray", "tests.fixtures.specs"]
