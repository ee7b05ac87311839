"""Settings: embedded by default (SQLite, in-memory channel layer, trials in-process).

BENCHFLOW_REDIS_URL turns on Celery scale-out and channels-redis; DATABASE_URL
(postgres://...) switches the index to PostgreSQL. Every variable read here (and elsewhere) is in
docs/settings.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from runs.environment import setting

BASE_DIR = Path(__file__).resolve().parent.parent


def _state_dir() -> Path:
    path = Path(
        os.environ.get("BENCHFLOW_HOME", Path.home() / ".local" / "share" / "benchflow-site")
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


STATE_DIR = _state_dir()


def _secret_key() -> str:
    """BENCHFLOW_SECRET_KEY, else a key made once for this machine and kept in STATE_DIR."""
    if os.environ.get("BENCHFLOW_SECRET_KEY"):
        return os.environ["BENCHFLOW_SECRET_KEY"]
    path = STATE_DIR / "secret-key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        import secrets

        key = secrets.token_urlsafe(48)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            return path.read_text().strip()
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key
    except OSError:
        return "benchflow-site-local-only"


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("BENCHFLOW_DEBUG", "") == "1"
# Host names the dashboard answers to beyond loopback (comma-separated), e.g. the name a team
# reaches `bench serve` by; the websocket origin check uses the same list.
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"] + [
    h.strip() for h in os.environ.get("BENCHFLOW_ALLOWED_HOSTS", "").split(",") if h.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.messages",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "channels",
    "runs",
    "viewer",
    "proxy",
]

# Django's own middleware, declared sync-only (benchflow_site/middleware.py says why).
MIDDLEWARE = [
    "benchflow_site.middleware.Security",
    "benchflow_site.middleware.Sessions",
    "benchflow_site.middleware.Common",
    "benchflow_site.middleware.Csrf",
    "benchflow_site.middleware.Authentication",
    "benchflow_site.middleware.Messages",
    "benchflow_site.middleware.XFrameOptions",
    "benchflow_site.middleware.ContentSecurityPolicy",
]
X_FRAME_OPTIONS = "DENY"
# `bench serve` (a team's dashboard) asks every visitor to log in; `bench view` (one person, on
# loopback) does not.
LOGIN_REQUIRED = os.environ.get("BENCHFLOW_LOGIN_REQUIRED", "") == "1"
if LOGIN_REQUIRED:
    MIDDLEWARE.append("benchflow_site.middleware.LoginRequired")
LOGIN_URL = "viewer:login"
LOGIN_REDIRECT_URL = "viewer:jobs"

ROOT_URLCONF = "benchflow_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "viewer.operate.context",
            ]
        },
    }
]
ASGI_APPLICATION = "benchflow_site.asgi.application"


def _database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,
        }
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path)}
    raise ImproperlyConfigured(
        f"DATABASE_URL has scheme {parsed.scheme!r}; use postgres://user@host:port/name or sqlite:///path"
    )


def _leases_beside(default: dict) -> dict:
    """On SQLite, scale-out's leases (workers, dispatchers, leases) live in a file of their own
    beside the index (benchflow.sqlite3 -> benchflow.leases.sqlite3): SQLite takes one writer at a
    time per file, and a worker's claim must not wait behind the coordinator's index writes."""
    path = Path(str(default["NAME"]))
    return {**default, "NAME": str(path.with_suffix(".leases" + (path.suffix or ".sqlite3")))}


if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": _database_from_url(os.environ["DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("BENCHFLOW_DB", str(STATE_DIR / "benchflow.sqlite3")),
            # kept open between requests: opening one (and its PRAGMAs) cost more than a page
            "CONN_MAX_AGE": 60,
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["leases"] = _leases_beside(DATABASES["default"])
DATABASE_ROUTERS = ["runs.databases.LeasesRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("BENCHFLOW_REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
# One message per slot: a busy worker reserves nothing a free one could run (with acks_late, the
# messages of the attempts running count against it).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = "benchflow"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# An attempt goes on while Redis restarts: its lease is in the database, not in the broker.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Redis redelivers a message not acked within this time (an attempt running longer than an hour
# gets a second delivery, which finds its lease held and does nothing).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes the worker thread's database connections before and after each
# task unless they may be reused this many times: every claim would open a new one (on PostgreSQL a
# new server process, the slowest part of a claim). They are reused; the worker recycles them by
# CONN_MAX_AGE, or after an error, before each claim (runs.workers.execute.claim_lease).
CELERY_DB_REUSE_MAX = 1_000_000

# The job folders `bench view` shows (os.pathsep-separated; each a job or a jobs folder); empty:
# every job in the index (`bench serve`).
BENCHFLOW_VIEW_ROOT = os.environ.get("BENCHFLOW_VIEW_ROOT", "")
# Without Redis to bring the hints, on a database other than SQLite (PostgreSQL): seconds between
# the server's reads of new Event rows through the ORM. On SQLite the server reads the table itself
# every 10 ms (viewer/watch.py), whatever this says.
BENCHFLOW_WATCH_S = float(os.environ.get("BENCHFLOW_WATCH_S", "0.05"))

# Operating from the browser (runs/operations/): task folders a launch may use (os.pathsep-
# separated) and the jobs folder launched jobs go into; a path from the browser that resolves
# outside them is refused.
BENCHFLOW_TASK_ROOTS = setting("BENCHFLOW_TASK_ROOTS")
BENCHFLOW_JOBS_DIR = setting("BENCHFLOW_JOBS_DIR", "jobs")
# How an operation leaves the request: a process of its own running this command (+ the kind),
# unless BENCHFLOW_LAUNCHER names a runs.operations.process.Launcher factory (a dotted path) that
# takes it elsewhere (tests record requests with one).
BENCHFLOW_OPERATION_ARGV = [sys.executable, "-m", "benchflow_site.cli", "_operate"]
BENCHFLOW_LAUNCHER = setting("BENCHFLOW_LAUNCHER")
# The model gateway a launch is checked against (the model, its provider key and price).
BENCHFLOW_GATEWAY = "benchflow_site.gateway.ProxyGateway"

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": os.environ.get("BENCHFLOW_LOG_LEVEL", "WARNING")},
}
