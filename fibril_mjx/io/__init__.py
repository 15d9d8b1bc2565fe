"""File formats and boundaries: recordings, ROS bags, MCAP, MAVLink HIL, a device bus."""
