"""PATHS's errors: an application's or a run's failure, apart from the tuple space's."""

from pastset import EventSpaceError, register_error


@register_error
class PathsError(EventSpaceError):
    """A PATHS failure: a broken tree, a collective called wrongly, a stage that cannot be built, a
    run that cannot start. Not a PastSetError: what an application or a pathmap did wrong is not
    the tuple space's fault; catch EventSpaceError for both."""
