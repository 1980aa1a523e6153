"""The ground floor: what every stage shares (errors, atomic files, torchrun, mask syntax, CLI generation).

Imports nothing from the project's other packages.
"""
