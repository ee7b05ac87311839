"""Harbor's job folders (Harbor 0.2x), both ways: `read` makes ours of its documents, `write`
makes its of ours (`bench export --format harbor`), `policy` holds the table of Harbor's
exception types both use.

Harbor writes a folder per trial, `<task>__<7 random>`, holding result.json (its `TrialResult`),
config.json (`TrialConfig`) and lock.json (`TrialLock`); the job folder holds config.json
(`JobConfig`), result.json (`JobResult`: progress and per-eval stats), lock.json and job.log.
Harbor retries a trial by deleting its folder, so each folder is one trial of one attempt, and it
records no trial index: a job's trials of a task are numbered oldest first as they are read
(runs/results/attempt_folder.py). A reward counts as Harbor counts it (`reward_valid`: no
exception whose policy voids it).

Field names are Harbor's (github.com/harbor-framework/harbor, `harbor/models/`); no Harbor code
is imported (it needs Python 3.12). tests/runs/test_export_harbor.py checks `write` with
Harbor's own code.
"""
