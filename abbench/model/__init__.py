"""Pure data: declared metrics, row keys, the typed records of samples.jsonl, the schedule
and what rounds are complete."""
