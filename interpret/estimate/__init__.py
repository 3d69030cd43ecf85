"""The planning layer: what a run will take, known from the checkpoint's files before any model loads.

`facts` reads config.json and the tokenizer files once (`ModelFacts`, token limits and counts); `report` sizes
a report, full or streamed; `audit` the peak memory of an audit's largest batch; `heads` costs a head study;
`memory` holds the budgets, the machine's memory and bytes in words. The command line's pre-flight
(`cli/preflight.py`, `cli/budget.py`) turns these numbers into refusals; the library bounds its own work with
the same budgets. Nothing here imports torch or numpy, so
`interpret --help` and a refused command stay fast: import the submodules.
"""
