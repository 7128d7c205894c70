"""Run one claimed job: the runner, the job's context, the suspect lane's child process."""
