"""Runs: config -> benchmark -> reward models -> upstream metrics -> decoding -> downstream metrics -> results."""
