"""The fixture trees copy sysfs, symlink cycles included (a device's ``infiniband/<hca>/device``
points back at the device): pytest must not walk into them."""

collect_ignore = ["fixtures"]
