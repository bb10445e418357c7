"""Operations on a packed dataset: ``stage`` it onto local disk, ``verify`` it, ``report`` a
run as JSON."""
