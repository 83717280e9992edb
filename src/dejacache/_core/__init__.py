"""Pure logic: no files, sockets or clocks. Drivers elsewhere do the I/O."""
