"""The vocabulary every other layer speaks, and nothing else.

Timelines, the collective algebra, blocks, loop modes, sync statements, the
instr registry, the memory base class and the statement walker. Modules here
import only exo, the standard library, `spork_lab.errors` and each other;
everything above (lang, platforms, analysis, sync, codegen, runtime, lab)
imports downward only (tests/test_layers.py checks it).
"""
