"""Schedules: the admin's table-less Schedule model (schedules live in Redis).

Changing a schedule takes the queues' change permission (`change_queuerecord`), which the
"Jobsite operators" group holds already.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0007_job_fillfactor"),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("name", models.CharField(max_length=113, primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=100)),
            ],
            options={
                "verbose_name": "schedule",
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
