"""Settings: embedded by default (SQLite, in-memory channel layer, trials in-process).

BENCHFLOW_REDIS_URL turns on Celery scale-out and channels-redis; DATABASE_URL
(postgres://...) switches the index to PostgreSQL. Every variable read here (and elsewhere) is in
docs/settings.md.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from runs.environment import setting

BASE_DIR = Path(__file__).resolve().parent.parent


def _private(path: Path, mode: int) -> None:
    """Make a file or folder of this user's readable by this user only (the index holds sessions
    and password hashes; the folder, the secret key). Another user's is left as it is."""
    try:
        info = path.stat()
    except OSError:
        return
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, mode)


def _state_dir() -> Path:
    path = Path(
        os.environ.get("BENCHFLOW_HOME", Path.home() / ".local" / "share" / "benchflow-site")
    )
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    _private(path, 0o700)
    return path


STATE_DIR = _state_dir()


def _secret_key() -> str:
    """BENCHFLOW_SECRET_KEY, else a key made once for this machine and kept in STATE_DIR; one that
    cannot be read is an error (a constant key would let anyone forge sessions)."""
    if os.environ.get("BENCHFLOW_SECRET_KEY"):
        return os.environ["BENCHFLOW_SECRET_KEY"]
    path = STATE_DIR / "secret-key"
    fix = "or set BENCHFLOW_SECRET_KEY"
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        import secrets

        key = secrets.token_urlsafe(48)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            return _secret_key()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"cannot make the secret key {path} ({exc.strerror}); fix: make {STATE_DIR} "
                f"writable by this user (or point BENCHFLOW_HOME elsewhere), {fix}"
            ) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(
            f"cannot read the secret key {path} ({getattr(exc, 'strerror', None) or exc}); "
            f"fix: make it readable by this user, {fix}"
        ) from None
    if not key:
        raise ImproperlyConfigured(
            f"the secret key {path} is empty; fix: delete it (a new one is made), {fix}"
        )
    _private(path, 0o600)
    return key


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

# Django's own middleware under its own names (`manage.py check --deploy` looks for them by name);
# the last one is sync-only, which makes the whole chain run in one hop to Django's thread
# (benchflow_site/middleware.py says why).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "benchflow_site.middleware.PageHeaders",
]
X_FRAME_OPTIONS = "DENY"
# `bench serve` (a team's dashboard) asks every visitor to log in; `bench view` (one person, on
# loopback) does not.
LOGIN_REQUIRED = os.environ.get("BENCHFLOW_LOGIN_REQUIRED", "") == "1"
if LOGIN_REQUIRED:
    MIDDLEWARE.insert(-1, "django.contrib.auth.middleware.LoginRequiredMiddleware")
LOGIN_URL = "viewer:login"
LOGIN_REDIRECT_URL = "viewer:jobs"

# --- logins (bench serve) -----------------------------------------------------------------------
# Failed logins are counted per user name and per client address in the index (runs/logins.py),
# so a lock holds across processes; while locked, even the right password is refused.
AUTHENTICATION_BACKENDS = ["viewer.logins.ThrottledBackend"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# A session ends after this many seconds without a request (refreshed at most once a minute:
# benchflow_site/middleware.py); a password change or reset ends the user's other sessions.
SESSION_COOKIE_AGE = int(os.environ.get("BENCHFLOW_SESSION_IDLE_S", str(8 * 3600)))

# --- transport (bench serve) ----------------------------------------------------------------------
# TLS is bench serve's own (--tls-cert/--tls-key set BENCHFLOW_TLS=1) or a reverse proxy's, which
# names the scheme the client used in a header (BENCHFLOW_FORWARDED_PROTO_HEADER, e.g.
# X-Forwarded-Proto; trusted only when set, so set it only behind such a proxy). Under TLS: cookies
# only over HTTPS, HSTS, and plain HTTP redirected to HTTPS.
BENCHFLOW_TLS = os.environ.get("BENCHFLOW_TLS", "") == "1"
BENCHFLOW_FORWARDED_PROTO_HEADER = os.environ.get("BENCHFLOW_FORWARDED_PROTO_HEADER", "").strip()
# The client's address behind such a proxy (e.g. X-Forwarded-For; the proxy must set it, not
# append to what the client sent): the login throttle counts failures per address.
BENCHFLOW_FORWARDED_FOR_HEADER = os.environ.get("BENCHFLOW_FORWARDED_FOR_HEADER", "").strip()
if BENCHFLOW_FORWARDED_PROTO_HEADER:
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + BENCHFLOW_FORWARDED_PROTO_HEADER.upper().replace("-", "_"),
        "https",
    )
HTTPS = BENCHFLOW_TLS or bool(BENCHFLOW_FORWARDED_PROTO_HEADER)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = int(os.environ.get("BENCHFLOW_HSTS_S", str(365 * 24 * 3600))) if HTTPS else 0
# Both bind every name under the dashboard's domain (and browsers' preload list) to HTTPS: the
# admin opts in (=1); off, Django's deploy checks for them are silenced, as that is a choice.
SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("BENCHFLOW_HSTS_SUBDOMAINS", "") == "1"
SECURE_HSTS_PRELOAD = os.environ.get("BENCHFLOW_HSTS_PRELOAD", "") == "1"
SILENCED_SYSTEM_CHECKS = [
    *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),
    *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),
]

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


def _private_sqlite(name: str) -> None:
    """An SQLite file made 0600 before SQLite makes it with the umask's mode (its -wal and -shm
    files take the database file's mode); an existing one is made 0600."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    path = Path(name)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        for each in (path, Path(f"{name}-wal"), Path(f"{name}-shm")):
            _private(each, 0o600)
    except OSError:
        return  # a folder that is not there: SQLite says so when it opens it


for _db in DATABASES.values():
    if _db["ENGINE"] == "django.db.backends.sqlite3":
        _private_sqlite(str(_db["NAME"]))
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
# With Redis set and a worker up, a run goes to the worker fleet instead (runs/operations/fleet.py):
# this sends the job's id to the workers' queue.
BENCHFLOW_FLEET_SENDER = "benchflow_site.celery.send_coordination"
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
