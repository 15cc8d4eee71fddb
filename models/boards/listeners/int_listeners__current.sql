{#- Who is listening to what right now: one row per user currently counted, with the one
    song they count for. The live listeners rules, in one place:
    * a playback is open when its latest START or STOP is a START (at one version a STOP
      wins, so a STOP that arrived before its START keeps it closed; a newer version
      supersedes an older one);
    * with a heartbeat expiry (var `listeners_expiry_seconds` > 0), a playback with no report
      for that long before as_of is closed;
    * a user with several open playbacks counts for the one started last (then the highest
      version, then the greatest playback_id), so each user counts for at most one song. -#}

{%- set expiry = var('listeners_expiry_seconds') | int %}

with

as_of as (

    select as_of from {{ ref('int_listeners__as_of') }}

),

playbacks as (

    select * from {{ ref('stg_toplist__playbacks') }}

),

open_playbacks as (

    select playbacks.*
    from playbacks
    cross join as_of
    where not playbacks.stopped
      and playbacks.song_id != ''
      {%- if expiry > 0 %}
      and playbacks.last_seen >= as_of.as_of - toIntervalSecond({{ expiry }})
      {%- endif %}

),

current_playbacks as (

    select
        user_id,
        argMax(
            tuple(open_playbacks.song_id, open_playbacks.playback_id),
            tuple(open_playbacks.started_at, open_playbacks.version, open_playbacks.playback_id)
        ) as current_playback
    from open_playbacks
    group by user_id

)

select
    user_id,
    tupleElement(current_playback, 1) as song_id,
    tupleElement(current_playback, 2) as playback_id
from current_playbacks
