"""The fixtures live in tests/fixtures/, one module each; this file registers them."""

pytest_plugins = ["tests.fixtures.cli", "tests.fixtures.ray", "tests.fixtures.specs"]


def pytest_collection_modifyitems(items):
    """The slow (end-to-end) tests first, so that xdist's workers end together on the short ones
    instead of one worker finishing a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
