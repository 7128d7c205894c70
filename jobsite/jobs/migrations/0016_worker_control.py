"""Operators may control workers (quiet, resume, stop): change_workerrecord joins their group."""

from django.contrib.auth.management import create_permissions
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

OPERATORS = "Jobsite operators"
CODENAME = "change_workerrecord"


def grant(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for config in apps.get_app_configs():
        config.models_module = True  # type: ignore[assignment]  # Django's idiom: any truthy value
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perm = Permission.objects.filter(content_type__app_label="jobsite", codename=CODENAME)
    for group in Group.objects.filter(name=OPERATORS):
        group.permissions.add(*perm)


def revoke(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perm = Permission.objects.filter(content_type__app_label="jobsite", codename=CODENAME)
    for group in Group.objects.filter(name=OPERATORS):
        group.permissions.remove(*perm)


class Migration(migrations.Migration):
    dependencies = [("jobsite", "0015_outbox_entries_plural")]

    operations = [migrations.RunPython(grant, revoke)]
