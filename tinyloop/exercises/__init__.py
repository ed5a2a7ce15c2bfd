"""Exercises: starter files cut from the reference source, and the checker that grades them.

``python -m tinyloop exercises`` lists them, ``start NAME`` writes a starter
file, ``check NAME FILE`` grades one.
"""
