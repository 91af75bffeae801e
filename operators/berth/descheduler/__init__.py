"""The load-aware descheduler: LowNodeLoad finds hot nodes and moves pods off them with
PodMigrationJobs, configured as Koordinator's descheduler is."""
