"""WSGI entry point, for servers such as gunicorn (the async view then runs in a thread)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

application = get_wsgi_application()
