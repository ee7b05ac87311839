"""Roles as Django groups: a viewer reads everything, an operator also launches, cancels, resumes,
reruns and regrades, an admin also has the Django admin (and its user management)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ObjectDoesNotExist, ValidationError

from runs import logins
from runs.models import Attempt, Budget, Event, Job, ReviewNote, Trial, TrialVerdict
from runs.problems import UserError

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
OPERATE = "operate_job"
OPERATE_PERM = f"runs.{OPERATE}"  # user.has_perm(OPERATE_PERM)


def _view_permissions() -> list[Permission]:
    models = (Job, Trial, Attempt, Budget, Event, ReviewNote, TrialVerdict)
    types = ContentType.objects.get_for_models(*models).values()
    return list(Permission.objects.filter(content_type__in=types, codename__startswith="view_"))


def _operate_permission() -> Permission:
    permission, _ = Permission.objects.get_or_create(
        codename=OPERATE,
        content_type=ContentType.objects.get_for_model(Job),
        defaults={"name": "Can launch, cancel, resume, rerun and regrade jobs"},
    )
    return permission


def ensure_roles() -> dict[str, Group]:
    """The three groups with their permissions (made or brought up to date; idempotent)."""
    views, operate = _view_permissions(), _operate_permission()
    groups = {}
    for role, permissions in (
        (VIEWER, views),
        (OPERATOR, [*views, operate]),
        (ADMIN, [*views, operate]),
    ):
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(permissions)
        groups[role] = group
    return groups


def role_of(user: AbstractBaseUser) -> str:
    if getattr(user, "is_superuser", False):
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
    return next((r for r in reversed(ROLES) if r in names), "")


def check_password(password: str, user: AbstractBaseUser) -> None:
    """Django's password validators (AUTH_PASSWORD_VALIDATORS: 12 characters or more, not a
    common password, not all digits, not like the user name), as a UserError naming each."""
    if not password:
        raise UserError("the password is empty; fix: type one, or set BENCHFLOW_PASSWORD")
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise UserError(
            f"the password is refused: {' '.join(exc.messages)} Nothing was changed; fix: "
            "choose a longer, less common one"
        ) from None


def add_user(name: str, role: str, password: str) -> bool:
    """Make the user (or update an existing one's role and password); True when it is new."""
    if role not in ROLES:
        raise UserError(f"--role {role}: one of {', '.join(ROLES)}")
    if not name or len(name) > 150:
        raise UserError("a user name is 1 to 150 characters")
    model = get_user_model()
    check_password(password, model(username=name))
    groups = ensure_roles()
    user, created = model.objects.get_or_create(username=name)
    user.set_password(password)
    user.is_staff = role == ADMIN
    user.is_superuser = role == ADMIN
    user.save()
    user.groups.set([groups[role]])
    return created


def _user(name: str) -> Any:
    try:
        return get_user_model().objects.get(username=name)
    except ObjectDoesNotExist:
        raise UserError(f"no user {name!r}; `bench user list` shows them") from None


def reset_password(name: str, password: str) -> None:
    """A new password for the user, checked as any; their sessions end (Django's session hash
    follows the password) and their failed-login lock is lifted."""
    user = _user(name)
    check_password(password, user)
    user.set_password(password)
    user.save(update_fields=["password"])
    logins.unlock(name)


def set_active(name: str, active: bool) -> None:
    """Disable a user (no login, and their sessions end at their next request) or enable them."""
    user = _user(name)
    user.is_active = active
    user.save(update_fields=["is_active"])
    if active:
        logins.unlock(name)
