"""Operations a user does on jobs (launch, cancel, resume, rerun, regrade): one layer that the CLI,
the dashboard's views and the Django admin's actions all call.

Long operations run out of the caller's process: `start` hands a request to a Launcher (a process
of its own), and `execute` runs it there; `bench run` and `bench eval resume` run theirs in their
own process (run.py).
"""
