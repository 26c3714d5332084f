"""What every voxcast process shares: settings and logging."""
