"""URL routes of the trial viewer."""

from django.urls import path

from viewer import views

urlpatterns = [
    path("", views.index, name="index"),
    path("jobs/<str:name>/", views.job_page, name="job"),
    path("jobs/<str:name>/<str:rollout>/", views.trial_page, name="trial"),
]
