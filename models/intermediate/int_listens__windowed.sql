{#- A table, built once per publication: chart_rankings reads it once per policy, and as a
    view this aggregation would run again for every read. Unsorted: the rankings partition it
    themselves, and sorting its rows (650k at 10M events) cost 0.4 s of every publication. -#}
{{ config(materialized='table', order_by='tuple()') }}

{%- set windows = chart_windows() -%}

-- as_of is one scalar for the whole query (a cross join with the as_of table made every
-- window's test twice as slow); only the buckets and days some window counts are read
with (select as_of from {{ ref('int_chart__as_of') }}) as as_of,

-- every song counted is in the totals: a key shared there stops the build (macros/keys.sql)
(select throwIf({{ shared_song_keys(ref('stg_toplist__listen_totals')) }} > 0,
    'two song ids share one 64-bit song key (macros/keys.sql): their listens would add up as'
    || ' one song''s, so this build stops')) as stop,

buckets as (

    select * from {{ ref('stg_toplist__listen_buckets') }}
    where {{ buckets_counted('bucket_start', 'as_of') }}

),

days as (

    select * from {{ ref('stg_toplist__listen_days') }}
    where {{ days_counted('day', 'as_of') }}

),

totals as (

    select * from {{ ref('stg_toplist__listen_totals') }}

),

pieces as (

    select 'bucket' as piece, bucket_start as starts, country, song_id, listens from buckets
    union all
    select 'day' as piece, day as starts, country, song_id, listens from days
    union all
    select 'total' as piece, toDateTime(0, 'UTC') as starts, country, song_id, listens from totals

),

-- each row on integer keys, with how it counts towards each window (1, 0 or -1) as one
-- number: digit i (base 3) is window i's share + 1
keyed as (

    select
        {{ country_key('country') }} as country_key,
        {{ song_key('song_id') }} as song_key,
        toUInt16(
            {%- for window_name in windows %}
            ({{ window_share(window_name, 'piece', 'starts', 'as_of') }} + 1) * {{ 3 ** loop.index0 }}{{ " +" if not loop.last }}
            {%- endfor %}
        ) as shares,
        song_id,
        listens
    from pieces

),

-- first the rows that count alike for a country and song: a few per song instead of one per
-- bucket
by_shares as (

    select
        country_key,
        song_key,
        shares,
        any(song_id) as song_id,
        sum(listens) as listens
    from keyed
    group by country_key, song_key, shares

),

-- then each country and global (two grouping sets: half the work of counting every row
-- twice), once per window
by_scope as (

    select
        if(grouping(country_key) = 0, {{ country_of_key('country_key') }}, 'global') as scope,
        any(song_id) as song_id,
        {%- for window_name in windows %}
        sum(listens * (intDiv(shares, {{ 3 ** loop.index0 }}) % 3 - 1)) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from by_shares
    group by grouping sets ((country_key, song_key), (song_key))

),

final as (

    select
        window_name,
        scope,
        song_id,
        toUInt64(listens) as listens
    from by_scope
    array join
        [{% for window_name in windows %}'{{ window_name }}'{{ ", " if not loop.last }}{% endfor %}] as window_name,
        [{% for window_name in windows %}listens_{{ window_name }}{{ ", " if not loop.last }}{% endfor %}] as listens
    -- songs with no listens in a window never appear on its board
    where listens > 0 and stop = 0

)

select * from final
