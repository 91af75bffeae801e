"""Pod migration: the PodMigrationJob phase logic, its arbitration and limits, pure."""
