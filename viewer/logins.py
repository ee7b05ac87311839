"""Logins of `bench serve`, throttled (runs/logins.py): Django's ModelBackend behind a check of the
user name's and the client address's locks, and login forms that say when a lock refused them."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.utils import timezone

from runs import logins


def client_address(request: HttpRequest | None) -> str | None:
    """The client's address as the server saw it (behind a proxy, the one its header names:
    BENCHFLOW_FORWARDED_FOR_HEADER, given to daphne)."""
    return (request.META.get("REMOTE_ADDR") or None) if request is not None else None


class ThrottledBackend(ModelBackend):
    """Every authentication (the dashboard's login, the admin's, the test client's) checks the
    locks first: a locked name or address is refused without its password being checked."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is None:
            username = kwargs.get(self._username_field())
        address = client_address(request)
        if logins.locked(username, address, timezone.now()) is not None:
            raise PermissionDenied("locked")  # Django's authenticate() stops at this backend
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            logins.failed(username, address, timezone.now())
        elif username:
            logins.succeeded(username)
        return user

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return str(get_user_model().USERNAME_FIELD)


class _SaysLocked:
    """A login form's check that names the lock when one refused it."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def _locked_or(self, error: ValidationError) -> ValidationError:
        lock = logins.locked(
            self.cleaned_data.get("username"), client_address(self.request), timezone.now()
        )
        return ValidationError(lock.text(), code="locked") if lock is not None else error


class LoginForm(_SaysLocked, AuthenticationForm):
    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as exc:
            raise self._locked_or(exc) from None


class AdminLoginForm(_SaysLocked, AdminAuthenticationForm):
    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as exc:
            raise self._locked_or(exc) from None
