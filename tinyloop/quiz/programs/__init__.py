"""The quizzes' programs: each a plain asyncio program, shown to the reader whole.

Each defines ``async def main()`` and runs it with ``asyncio.run`` when run
as a script; tinyloop/quiz/runner.py runs the same ``main`` on the loop it
is asked for.  What each prints is declared in tinyloop/quiz/catalog.py.
"""
