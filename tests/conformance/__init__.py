"""One conformance suite over every asyncio event loop; see ``conftest.py`` for the rows."""
