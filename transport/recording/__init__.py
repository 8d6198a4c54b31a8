"""transport/recording."""
