"""The "Jobsite viewers" and "Jobsite operators" groups, holding the app's permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# As of this migration (jobsite.jobs.permissions.GROUPS may grow later, through new migrations).
READ = ["view_jobrecord", "view_jobevent", "view_queuerecord", "view_workerrecord"]
GROUPS = {
    "Jobsite viewers": READ,
    "Jobsite operators": [
        *READ,
        "add_jobrecord",
        "cancel_job",
        "retry_job",
        "purge_job",
        "change_queuerecord",
    ],
}


def make_groups(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Permissions are created after all migrations; make them now so the groups can hold them.
    for config in apps.get_app_configs():
        config.models_module = True  # type: ignore[assignment]  # Django's idiom: any truthy value
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="jobsite", codename__in=codenames)
        )


def drop_groups(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):

    dependencies = [("jobsite", "0001_initial")]

    operations = [migrations.RunPython(make_groups, drop_groups)]
