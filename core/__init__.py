"""What every voxcast process shares: settings, logging, the audio rates, the job states and queue kinds, and the
job service's database, storage and events. Imports nothing of voxcast above it."""
