from django.urls import path

from . import views

urlpatterns = [
    path("", views.index),
    path("sync/", views.sync_view),
    path("async/", views.async_view),
    path("stats/", views.stats_view),
    path("soak/", views.soak_view),
]
