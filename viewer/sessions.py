"""Is this session a logged-in user's? Asked by the stored-fragment fast path (viewer/fragments.py)
under `bench serve`, where fifty pages fetch a fragment after each hint: the sessions of the
requests that arrive together are checked in one trip to the database thread, not one Django
request cycle each.

The check is Django's own (`django.contrib.auth.get_user`), read-only: the session exists and has
not expired, its backend is configured and returns the user (ModelBackend: an active one), and
the session's hash matches the user's with the current SECRET_KEY. What Django would change (a
session to flush, a key to cycle after a secret rotation) is left to Django: such a session is
"not known" here and its request goes through Django's middleware as any other.
"""

from __future__ import annotations

import asyncio
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.models import Session
from django.http import parse_cookie
from django.utils import timezone
from django.utils.crypto import constant_time_compare


def session_key(scope: dict[str, Any]) -> str:
    """The session cookie's value in an ASGI scope ('' when there is none)."""
    for name, value in scope.get("headers") or ():
        if name == b"cookie":
            key = parse_cookie(value.decode("latin-1")).get(settings.SESSION_COOKIE_NAME, "")
            if key:
                return str(key)
    return ""


def logged_in_keys(keys: list[str]) -> set[str]:
    """Which of these session keys belong to a logged-in user, as Django's auth would accept
    them on this request (sync: the ORM). With the database's sessions and ModelBackend (ours),
    the sessions are read in one query and their users in another, not two queries a page: fifty
    pages ask after each hint."""
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if settings.SESSION_ENGINE == "django.contrib.sessions.backends.db":
        now = timezone.now()
        rows = Session.objects.filter(session_key__in=keys, expire_date__gt=now)
        store = store_class()
        data = {
            key: store.decode(raw) for key, raw in rows.values_list("session_key", "session_data")
        }
    else:
        data = {key: store_class(key).load() for key in keys}
    wanted: dict[str, list[Any]] = {}
    for session in data.values():
        if (
            SESSION_KEY in session
            and session.get(BACKEND_SESSION_KEY) in settings.AUTHENTICATION_BACKENDS
        ):
            wanted.setdefault(session[BACKEND_SESSION_KEY], []).append(
                get_user_model()._meta.pk.to_python(session[SESSION_KEY])  # type: ignore[union-attr]
            )
    users = {path: _users(path, ids) for path, ids in wanted.items()}
    accepted = set()
    for key, session in data.items():
        if session.get(BACKEND_SESSION_KEY) not in users:
            continue
        user_id = get_user_model()._meta.pk.to_python(session[SESSION_KEY])  # type: ignore[union-attr]
        user = users[session[BACKEND_SESSION_KEY]].get(user_id)
        if user is None:
            continue
        if not hasattr(user, "get_session_auth_hash"):
            accepted.add(key)
            continue
        stored_hash = session.get(HASH_SESSION_KEY) or ""
        if stored_hash and constant_time_compare(stored_hash, user.get_session_auth_hash()):
            accepted.add(key)
    return accepted


def _users(backend_path: str, ids: list[Any]) -> dict[Any, Any]:
    """The users the backend returns for these ids (ModelBackend's get_user, for all at once)."""
    backend = load_backend(backend_path)
    if isinstance(backend, ModelBackend) and type(backend).get_user is ModelBackend.get_user:
        rows = get_user_model()._default_manager.filter(pk__in=ids)
        return {user.pk: user for user in rows if backend.user_can_authenticate(user)}
    found = {user_id: backend.get_user(user_id) for user_id in ids}
    return {user_id: user for user_id, user in found.items() if user is not None}


class SessionCheck:
    """Checks session keys in batches: one batch in the database thread at a time; the keys asked
    for meanwhile (the other pages of the same hint) go together in the next."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[bool]]] = {}
        self._running = False

    async def logged_in(self, key: str) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if not self._running:
            self._running = True
            asyncio.get_running_loop().call_soon(self._next)
        return await future

    def _next(self) -> None:
        batch, self._waiting = self._waiting, {}
        if not batch:
            self._running = False
            return
        asyncio.get_running_loop().create_task(self._check(batch))

    async def _check(self, batch: dict[str, list[asyncio.Future[bool]]]) -> None:
        try:
            accepted = await database_sync_to_async(logged_in_keys)(list(batch))
        except Exception:  # noqa: BLE001 - the database unreachable: Django answers instead
            accepted = set()
        for key, futures in batch.items():
            for future in futures:
                if not future.done():
                    future.set_result(key in accepted)
        self._next()
