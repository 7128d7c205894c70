"""API tokens get an expiry and a scope; the "Jobsite viewers" and "Jobsite operators" groups."""

from django.contrib.auth.management import create_permissions
from django.db import migrations, models

import django.db.models.deletion
from django.conf import settings

# As of this migration (jobsite.jobs.permissions.GROUPS may grow later, through new migrations).
READ = ["view_job", "view_jobevent", "view_queue", "view_worker"]
GROUPS = {
    "Jobsite viewers": READ,
    "Jobsite operators": [*READ, "add_job", "cancel_job", "retry_job", "purge_job", "change_queue"],
}


def make_groups(apps, schema_editor):
    # Permissions are created after all migrations; make them now so the groups can hold them.
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*Permission.objects.filter(
            content_type__app_label__in=["jobs"], codename__in=codenames
        ))


def drop_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("jobs", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="permissions",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="queues",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(
                editable=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(make_groups, drop_groups),
    ]
