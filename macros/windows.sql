{#- Window and as_of rules (DESIGN.md "Windows and snapshots"), in one place. -#}

{% macro chart_windows() %}
  {#- Window name -> length in seconds; none means every event before as_of. -#}
  {{ return({'1h': 3600, '24h': 86400, '7d': 604800, '30d': 2592000, 'all': none}) }}
{% endmacro %}

{% macro align_as_of(value) -%}
  {#- as_of aligned down to the bucket. `value` is a SQL expression; null means now. -#}
  {#- toplist_bucket_start is the engine's bucket rule (sql/0005), shared with the aggregates. -#}
  toplist_bucket_start(
    {% if value is none %}now64(3, 'UTC'){% else %}parseDateTime64BestEffort({{ value }}, 3, 'UTC'){% endif %}
  )
{%- endmacro %}

{% macro in_window(time_column, window_name, as_of_column) -%}
  {#- as_of - W <= t < as_of; `all` has no lower bound. Exact on bucket starts because as_of
      and every window length are whole buckets. -#}
  {%- set length = chart_windows()[window_name] -%}
  ({{ time_column }} < {{ as_of_column }}
  {%- if length is not none %} and {{ time_column }} >= {{ as_of_column }} - toIntervalSecond({{ length }}){% endif %})
{%- endmacro %}

{% macro longest_bounded_window() %}
  {#- The longest window with a lower bound, in seconds: how far back buckets are read. -#}
  {{ return(chart_windows().values() | reject('none') | max) }}
{% endmacro %}

{% macro whole_day_within(day_column, length, as_of) -%}
  {#- The UTC day starting at `day_column` lies wholly inside [as_of - length, as_of). -#}
  ({{ day_column }} >= {{ as_of }} - toIntervalSecond({{ length }})
  and {{ day_column }} + toIntervalDay(1) <= {{ as_of }})
{%- endmacro %}

{% macro counts_whole_days(window_name) -%}
  {#- Whether a window sums the days wholly inside it from the day sums (sql/0030): every
      bounded window of a day or more. -#}
  {{- return(chart_windows()[window_name] is not none and chart_windows()[window_name] >= 86400) -}}
{%- endmacro %}

{% macro counts_whole_weeks(window_name) -%}
  {#- Whether a window sums the UTC weeks (Monday to Monday) wholly inside it from the week sums
      (sql/0032): every bounded window of a week or more. -#}
  {{- return(chart_windows()[window_name] is not none and chart_windows()[window_name] >= 604800) -}}
{%- endmacro %}

{% macro week_of(time_column) -%}
  {#- The start of the UTC week (Monday 00:00) that `time_column` falls in, as the week sums
      (sql/0032) store it. -#}
  toDateTime(toMonday({{ time_column }}), 'UTC')
{%- endmacro %}

{% macro in_whole_weeks(day_column, length, as_of) -%}
  {#- The UTC day starting at `day_column` lies in a week wholly inside [as_of - length, as_of):
      from the first Monday at or after the window's start up to the Monday of as_of's week
      (which is as_of itself when as_of is a Monday's midnight). As ranges of the day, so that a
      read of the day sums skips the rest by their order. -#}
  ({{ day_column }} >= {{ week_of(as_of ~ ' - toIntervalSecond(' ~ (length + 1) ~ ')') }} + toIntervalDay(7)
  and {{ day_column }} < {{ week_of(as_of) }})
{%- endmacro %}

{% macro takes_whole_day(window_name, day_column, as_of) -%}
  {#- A window of a day or more takes the UTC day starting at `day_column` from the day sums:
      the day lies wholly inside it and in none of the whole weeks it takes from the week sums. -#}
  {%- set length = chart_windows()[window_name] -%}
  ({{ whole_day_within(day_column, length, as_of) }}
  {%- if counts_whole_weeks(window_name) %}
    and not {{ in_whole_weeks(day_column, length, as_of) }}
  {%- endif %})
{%- endmacro %}

{% macro window_share(window_name, piece, time_column, as_of) -%}
  {#- How a row counts towards the window: 1, 0 or -1. `piece` says what the row is: 'bucket'
      (a 10-minute bucket starting at time_column), 'day' or 'week' (a UTC day's or week's sum,
      starting at time_column) or 'total' (a song's all-time total). A bounded window sums its
      buckets (in_window), except that one of a week or more takes the weeks wholly inside it
      from the week sums, one of a day or more the days wholly inside it (and in none of those
      weeks) from the day sums, and only the buckets of its ragged first and last days from the
      buckets, so each bucket counts once either way. `all` is the all-time total less the
      buckets at or after as_of, so it never reads the buckets before as_of. -#}
  {%- if chart_windows()[window_name] is none -%}
  multiIf({{ piece }} = 'total', 1, {{ piece }} = 'bucket' and {{ time_column }} >= {{ as_of }}, -1, 0)
  {%- elif counts_whole_days(window_name) -%}
  {%- set length = chart_windows()[window_name] -%}
  toInt64(
    {%- if counts_whole_weeks(window_name) %}
    ({{ piece }} = 'week' and {{ in_whole_weeks(time_column, length, as_of) }}) or
    {%- endif %}
    ({{ piece }} = 'day' and {{ takes_whole_day(window_name, time_column, as_of) }})
    or ({{ piece }} = 'bucket' and {{ in_window(time_column, window_name, as_of) }}
        and not {{ whole_day_within('toStartOfDay(' ~ time_column ~ ')', length, as_of) }}))
  {%- else -%}
  toInt64({{ piece }} = 'bucket' and {{ in_window(time_column, window_name, as_of) }})
  {%- endif -%}
{%- endmacro %}

{% macro buckets_counted(time_column, as_of) -%}
  {#- The buckets that count towards some window (window_share) as ranges of `time_column`,
      which the buckets are sorted by: the ragged first day of each window that counts whole
      days, as_of's own day onwards, and every other window from its start. -#}
  ({{ time_column }} >= {{ as_of }} - toIntervalSecond({{ longest_bounded_window() }}) and (
    {{ time_column }} >= toStartOfDay({{ as_of }})
    {%- for window_name, length in chart_windows().items() if length is not none %}
    {%- if counts_whole_days(window_name) %}
    or ({{ time_column }} >= {{ as_of }} - toIntervalSecond({{ length }})
        and {{ time_column }} < toStartOfDay({{ as_of }} - toIntervalSecond({{ length }})) + toIntervalDay(1))
    {%- else %}
    or {{ time_column }} >= {{ as_of }} - toIntervalSecond({{ length }})
    {%- endif %}
    {%- endfor %}))
{%- endmacro %}

{% macro days_counted(day_column, as_of) -%}
  {#- The days that count towards some window from the day sums (window_share): those wholly
      inside a window and in none of the whole weeks it takes from the week sums. -#}
  (
  {%- for window_name in chart_windows() if counts_whole_days(window_name) %}
    {{ "or " if not loop.first }}{{ takes_whole_day(window_name, day_column, as_of) }}
  {%- endfor %})
{%- endmacro %}

{% macro weeks_counted(week_column, as_of) -%}
  {#- The weeks that count towards some window (window_share): those wholly inside one. -#}
  (
  {%- for window_name, length in chart_windows().items() if counts_whole_weeks(window_name) %}
    {{ "or " if not loop.first }}{{ in_whole_weeks(week_column, length, as_of) }}
  {%- endfor %})
{%- endmacro %}

{% macro popular_windows() %}
  {#- The marketplace shelves' windows: name -> length in seconds (as_of is on 10 seconds).
      A restaurant's public shelf widens 1d -> 7d -> 28d while it has too few orders. -#}
  {{ return({'1m': 60, '1h': 3600, '1d': 86400, '7d': 604800, '28d': 2419200}) }}
{% endmacro %}

{% macro board_as_of(step_seconds=none) -%}
  {#- The as_of of one of the other boards (var `board_as_of`, default now), aligned down to
      `step_seconds` (10 seconds for the shelves, whose rows are 10-second buckets), or to the
      millisecond without one (the live boards, which count each event as it is: an order
      counts in the first snapshot cut after it, not after the end of its second). -#}
  {%- set moment -%}
    {% if var('board_as_of') is none %}now64(3, 'UTC'){% else %}parseDateTime64BestEffort('{{ var("board_as_of") }}', 3, 'UTC'){% endif %}
  {%- endset -%}
  {%- if step_seconds is none -%}
  {{ moment }}
  {%- else -%}
  toDateTime64(toStartOfInterval({{ moment }}, toIntervalSecond({{ step_seconds }})), 3, 'UTC')
  {%- endif -%}
{%- endmacro %}
