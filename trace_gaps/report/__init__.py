"""The report: an Analysis's facts become candidates, verdicts and words, in one outline."""
