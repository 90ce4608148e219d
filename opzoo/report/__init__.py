"""`opzoo report`: the checks' verdicts and evidence as one self-contained HTML page."""
