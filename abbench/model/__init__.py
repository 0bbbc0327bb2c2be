"""Pure data: declared metrics, row keys, the schedule and what rounds are complete."""
