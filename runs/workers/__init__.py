"""Scale-out: a job's attempts run on `bench worker` processes (Celery on Redis), held by leases in
the database. `dispatch` is the coordinator's side, `execute` the worker's, `leases` the claims
both make with conditional UPDATEs."""
