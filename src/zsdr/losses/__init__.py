"""Training objectives. Each module holds one family, so a rule that uses a loss lists exactly
that module among its code inputs (editing it re-plans only the trainings that use it)."""
