"""Plugins that misbehave while they load: opzoo must contain each."""
