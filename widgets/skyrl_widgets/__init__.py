"""Views for skyrl-nb: dashboard pieces, trajectory inspector, config form, cluster panel."""
