{#- One row per playback, its aggregate states merged (sql/0015): the latest START or STOP
    as (version, is_stop), the song of its latest START, when that started, and its latest
    report of any type. The retention (var `listeners_retention_hours`, sql/0019), in one
    place: only the states of reports from the as_of's hour and the retention's hours before
    it are merged (0: every hour). -#}

{%- set retention = var('listeners_retention_hours') | int %}

with

source as (

    select * from {{ source('toplist', 'playbacks') }}
    {%- if retention > 0 %}
    where hour >= toStartOfHour({{ board_as_of() }}) - toIntervalHour({{ retention }})
    {%- endif %}

),

final as (

    select
        user_id,
        playback_id,
        maxMerge(state) as state,
        argMaxMerge(song_id) as song_id,
        maxMerge(started_at) as started_at,
        maxMerge(last_seen) as last_seen
    from source
    group by user_id, playback_id

)

select
    user_id,
    playback_id,
    tupleElement(state, 1) as version,
    tupleElement(state, 2) = 1 as stopped,
    song_id,
    started_at,
    last_seen
from final
